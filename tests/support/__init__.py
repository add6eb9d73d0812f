"""Support for the tests: servers, topologies, stand-ins, and shared helpers."""
