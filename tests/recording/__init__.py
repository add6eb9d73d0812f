"""Tests of whos_online.recording."""
