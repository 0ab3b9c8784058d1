"""`model=vit` (unlearnbench.tasks.image.models.vit): a tiny random ViT through every method, pretrained weights from a
local
directory with a new head, one line when there are none, on-device resizing, and the recipe's cosine schedule."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from fabricate import write_pins
from helpers import results, run_cli

from unlearnbench.runtime.errors import UserError
from unlearnbench.runtime.train import recipe_schedule
from unlearnbench.tasks.image.models.vit import vit

TINY_VIT = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
            "patch_size": 8}  # 24k parameters at 32 × 32
TINY_VIT_ARG = "model.config={" + ",".join(f"{k}:{v}" for k, v in TINY_VIT.items()) + "}"


@pytest.mark.processes
def test_every_method_runs_on_a_tiny_vit_on_pins_through_the_console_script(tmp_path):
    write_pins(tmp_path / "data" / "pins", per_class=12)
    run = run_cli(["dataset=pins", "model=vit", "model.pretrained=null", TINY_VIT_ARG, "model.input_size=32",
                   "train.epochs=2", "train.batch_size=16", "scenario.targets=[bill_gates]", "runtime.threads=1",
                   "runtime.print_table=false"], tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    (result,) = results(tmp_path / "sweep").values()
    assert result["status"] == "complete" and result["failures"] == []
    methods = {r["method"] for r in result["records"] if r["role"] == "unlearned"}
    assert methods == {"bad_teacher", "finetune", "gradient_ascent", "l1_sparse", "lfssd", "neggrad_plus",
                       "random_labels", "retrain", "salun", "scrub", "ssd", "unsir"}
    layer = [r["value"] for r in result["records"] if r["metric"] == "layer_distance" and r["method"] == "ssd"]
    assert layer and layer[0] > 0  # SSD dampened some of the transformer's parameters
    log = next((tmp_path / "sweep").glob("*/unlearnbench.log")).read_text()
    assert "of 24,102 parameter entries selected" in log  # SSD ranks every parameter of the ViT (no buffers)
    assert "α = 5" in log  # the ViT full-class α of the SSD authors' code


def test_pretrained_weights_load_from_a_local_directory_with_a_new_head(tmp_path):
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    saved = ViTForImageClassification(ViTConfig(image_size=32, num_labels=7, **TINY_VIT))
    saved.save_pretrained(tmp_path / "weights")
    model = vit(num_classes=3, in_channels=3, image_size=32, pretrained=str(tmp_path / "weights"), input_size=32)
    loaded = dict(model.network.named_parameters())
    for name, parameter in saved.named_parameters():
        if name.startswith("classifier"):
            assert loaded[name].shape[0] == 3  # re-initialised for this dataset's classes
        else:
            assert torch.equal(loaded[name], parameter), name
    assert model(torch.zeros(2, 3, 32, 32)).shape == (2, 3)
    with pytest.raises(UserError, match=r"that directory holds no ViT weights.*model\.pretrained=DIR"):
        vit(num_classes=3, in_channels=3, image_size=32, pretrained=str(tmp_path))
    with pytest.raises(UserError, match=r"nor in the local Hugging Face cache .*model\.pretrained=null"):
        vit(num_classes=3, in_channels=3, image_size=32, pretrained="unlearnbench-tests/no-such-vit")
    with pytest.raises(UserError, match="takes RGB images"):
        vit(num_classes=3, in_channels=1, image_size=8, pretrained=str(tmp_path / "weights"))


def test_other_image_sizes_are_resized_and_centre_cropped_on_the_device():
    torch.manual_seed(1)
    model = vit(num_classes=4, in_channels=3, image_size=8, pretrained=None, config=TINY_VIT, input_size=32,
                resize=40).eval()
    images = torch.rand(3, 3, 8, 8)
    expected = torch.nn.functional.interpolate(images, size=(40, 40), mode="bilinear", antialias=True)[..., 4:36, 4:36]
    with torch.no_grad():
        assert torch.equal(model(images), model.network(pixel_values=expected).logits)
    with pytest.raises(UserError, match="resize 16 is smaller than input_size 32"):
        vit(num_classes=4, in_channels=3, image_size=8, pretrained=None, config=TINY_VIT, input_size=32, resize=16)


def test_cosine_schedule_warms_up_then_anneals_to_zero():
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    schedule = recipe_schedule(optimizer, steps_per_epoch=10, warmup_epochs=1, milestones=[], gamma=0.2,
                               schedule="cosine", epochs=5)
    factors = [schedule.lr_lambdas[0](step) for step in range(50)]
    assert factors[:10] == pytest.approx([(k + 1) / 10 for k in range(10)])  # linear warm-up, full rate at step 9
    assert factors[19] == pytest.approx(0.5 * (1 + math.cos(math.pi * 10 / 40)))
    assert factors[49] == pytest.approx(0.0, abs=1e-12) and all(a >= b for a, b in itertools.pairwise(factors[9:]))


def test_the_supreme_pins_preset_sweeps_both_models_scenarios_and_ten_training_seeds():
    from helpers import compose_config

    config = compose_config(["experiment=supreme_pins"], return_hydra_config=True)
    assert config.dataset.name == "pins"
    assert dict(config.hydra.sweeper.params) == {"model": "resnet18,vit", "scenario": "full_class,random_sample",
                                                 "seeds.train": "range(260,270)"}
    vit_job = compose_config(["experiment=supreme_pins", "model=vit", "scenario=random_sample", "seeds.train=263"])
    assert (vit_job.seeds.unlearn, vit_job.seeds.eval) == (263, 263)  # J = K = 1
    assert (vit_job.dataset.image_size, list(vit_job.dataset.mean)) == (224, [0.485, 0.456, 0.406])
    assert (vit_job.train.optimizer, vit_job.train.lr, vit_job.train.schedule) == ("adamw", 5e-5, "cosine")
    assert vit_job.model.pretrained == "google/vit-base-patch16-224"  # paths.vit_weights, for every model of a sweep
    weights = compose_config(["experiment=supreme_pins", "model=vit", "paths.vit_weights=/weights/vit"])
    assert weights.model.pretrained == "/weights/vit"
    resnet_job = compose_config(["experiment=supreme_pins", "model=resnet18", "paths.vit_weights=/weights/vit"])
    assert (resnet_job.dataset.image_size, resnet_job.model.width, list(resnet_job.dataset.mean)) == (
        32, 64, [0.516, 0.419, 0.373])
