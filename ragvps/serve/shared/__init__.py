"""What the doors and the gate share: the App's life in the server (lifecycle), blocking work off the loop
(threads), error bodies and shapes (failures, error_shapes, bodies), request conversion (convert), streams (stream,
chat), and /docs."""
