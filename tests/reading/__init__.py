"""Tests of whos_online.reading."""
