"""Health's outputs: verdict, JSON, drain list and baseline file, from the core's findings."""
