"""The CIFAR-style ResNet18: 3×3 stride-1 stem, no max-pool, BasicBlocks [2, 2, 2, 2], with a width parameter.

`width=64` is the reference network (11.2 M parameters); narrower widths keep the same topology for CPU runs.
"""

from __future__ import annotations

from torch import Tensor, nn


class BasicBlock(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, 1, stride, bias=False), nn.BatchNorm2d(out_channels)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.bn1(self.conv1(x)).relu()
        out = self.bn2(self.conv2(out))
        return (out + self.shortcut(x)).relu()


class ResNet18(nn.Module):
    def __init__(self, num_classes: int, in_channels: int = 3, width: int = 64) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        layers, channels = [], width
        for i, stride in enumerate((1, 2, 2, 2)):
            out = width * 2**i
            layers.append(nn.Sequential(BasicBlock(channels, out, stride), BasicBlock(out, out, 1)))
            channels = out
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.bn1(self.conv1(x)).relu()
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.pool(x).flatten(1))


def resnet18(num_classes: int, in_channels: int, image_size: int, width: int = 64, name: str = "resnet18") -> ResNet18:
    """The model component: the job passes the dataset's classes, channels and image size."""
    return ResNet18(num_classes, in_channels, width)
