"""Errors that name the JSON path and the rule broken."""

from __future__ import annotations


class ContractError(ValueError):
    """A contract or manifest broke a rule: ``<json.path>: <rule>``."""

    def __init__(self, path: str, rule: str):
        self.path = path or "$"
        self.rule = rule
        super().__init__(f"{self.path}: {rule}")


class EvidenceError(ValueError):
    """An evidence file that is missing, corrupt, or not of the WS1 evidence schema."""
