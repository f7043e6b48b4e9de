"""Training recipes for the Sentinel, the Detector and the Explainer (needs the `train` extra)."""
