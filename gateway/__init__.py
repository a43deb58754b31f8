"""The HTTP gateway: REST, the websocket stream, the AI Runtime endpoints and
the operator's page. It reads PostgreSQL directly (read-only) and writes only
through nameko RPC to the line_controller."""
