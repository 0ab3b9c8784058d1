"""The ranking task's unlearning methods: one module per method behind `base.FederatedMethod`, one YAML each in
`conf/method/` (README, "Federated online learning to rank")."""
