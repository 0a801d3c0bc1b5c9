"""The longrun REST API (FastAPI)."""
