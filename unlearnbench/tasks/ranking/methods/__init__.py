"""The ranking task's unlearning methods: one module per method behind `base.FederatedMethod`, one YAML each in
`conf/method/` (docs/ranking.md)."""
