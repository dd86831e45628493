"""External tools tritonize uses when they are present, and how to get them."""
