"""Files on disk: atomic state files, where they live, the loop's lock."""
