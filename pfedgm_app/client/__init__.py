"""A SuperNode's side below the ClientApp's handlers (`client_app.py`).

- `node`: which client this node is, its data, where it keeps its model, the task a message
  gives its method's plug-in (`methods/`)
- `personal_model`: the device's personalized model on its own disk (safetensors, no pickle)
- `predict`: images classified with that model, without Flower (`pfedgm predict`)
"""
