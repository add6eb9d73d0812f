"""What every bench shares: servers, clients, interleaved rounds, statistics and the tables."""
