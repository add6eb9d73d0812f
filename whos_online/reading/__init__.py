"""What pages show: snapshots of who is online, the viewer counted in, the dashboard."""
