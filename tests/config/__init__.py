"""Tests of whos_online.config."""
