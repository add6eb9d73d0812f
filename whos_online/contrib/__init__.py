"""Ready-made pieces for sites built on other apps: each module imports its app only when used."""
