"""Reaching Redis: clients, the breakers that keep an outage off the pages, Sentinels, shards."""
