"""A small forum, so that the example shows rooms: who is reading each topic."""

from __future__ import annotations

from django.db import models
from django.urls import reverse


class Board(models.Model):
    name = models.CharField(max_length=100)

    class Meta:
        ordering = ("pk",)

    def __str__(self) -> str:
        return self.name


class Topic(models.Model):
    board = models.ForeignKey(Board, on_delete=models.CASCADE, related_name="topics")
    title = models.CharField(max_length=200)
    body = models.TextField()

    class Meta:
        ordering = ("pk",)

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("topic", args=[self.pk])

    @property
    def room(self) -> str:
        """The room its readers are in (``ROOMS`` in the settings puts them there)."""
        return f"topic:{self.pk}"
