"""Live updates: the pages' widgets pushed to them as they change, under ASGI."""
