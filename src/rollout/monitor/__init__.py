"""Read-only views of the ledger for the CLI (and, later, the web monitor)."""
