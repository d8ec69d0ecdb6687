"""What travels between the ServerApp and the ClientApp (flwr-free contract, flwr replies).

- `wire`: the contract: message types, record names and metric keys, imported by both sides
- `replies`: a ClientApp's side of it: what a message carries, and the replies the strategies
  expect, checked before they leave the device
"""
