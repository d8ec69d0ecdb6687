"""A run's records on the ServerApp's disk (its `output-dir`, docs/outputs.md).

- `run_folder`: the folder's files, named, written and read in one place (`RunFolder`)
- `results`: what a run writes and logs as it goes (`RunWriter`)
- `run_outputs`: the files of a finished run, for any ServerApp
- `plots`: `accuracy.png`, from what the run wrote
- `checkpoint`: what a stopped run resumes from, and who may write the folder
- `initial_model`: a run's global model on disk, and a run that starts from it
"""
