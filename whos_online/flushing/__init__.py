"""The process's queue of visits and page hits, and the thread that writes them in batches."""
