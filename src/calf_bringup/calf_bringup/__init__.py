"""The calf command line, network profiles, experiments and launch files."""
