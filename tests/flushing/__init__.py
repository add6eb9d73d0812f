"""Tests of whos_online.flushing."""
