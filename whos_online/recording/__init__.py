"""A request turned into a visit: the throttle cookie, who the visitor is, their room."""
