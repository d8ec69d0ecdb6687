"""quickstart-pfedgm: pFedGM with a backbone and data pipeline of this project's own."""
