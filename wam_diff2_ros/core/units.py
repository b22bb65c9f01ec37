"""Time units: the package keeps every time as integer nanoseconds."""

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
