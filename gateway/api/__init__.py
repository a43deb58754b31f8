"""One blueprint per area. Each module exposes ``blp`` (a flask-smorest Blueprint);
``gateway.app.AREAS`` registers them, by name."""
