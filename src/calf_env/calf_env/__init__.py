"""Gymnasium environments behind a real-time stepper, and the env node."""
