"""The application: the core assembled in one place, and the use cases the Discord edge calls."""
