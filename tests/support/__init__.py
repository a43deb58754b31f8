"""Helpers the test suite shares (databases, brokers, waiting on conditions)."""
