"""API keys: the operator's and each server's, their accounts, request budgets and encryption at rest."""
