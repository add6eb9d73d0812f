"""Tests of whos_online.backend."""
