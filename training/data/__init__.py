"""Dataset adapters (one per public dataset) and record hygiene shared by the recipes."""
