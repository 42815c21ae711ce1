# A stand-in for NeMo Gym's records module: just enough for the driver's
# info op, so the driver's error paths are tested without a Gym checkout.
TOKEN_ENTRY_RECORD_SCHEMA_VERSION = 1
