"""Tests of whos_online.store."""
