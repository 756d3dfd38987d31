"""Several processes: the execution strategy over them (``distributed``: ``Dist``), how they join before Hydra starts
(``process_group``) and FSDP2 on the policy (``fsdp``)."""
