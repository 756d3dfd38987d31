"""The controllers: difficulty bins, the online classifier, prompt samplers, rollout allocators, and their math."""
