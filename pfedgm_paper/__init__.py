"""The paper's tables and figures from runs: the grid of cells (`grid`), the runner
(`pfedgm-paper run`), and what is rendered from a results folder (`pfedgm-paper render`)."""
