# A stand-in for NeMo Gym's consumer that always raises, to test that the
# driver carries Gym's exception back as a failed reply.
def trajectories_for_rollout(rollout_id, dirs, *, builder="prefix_merging", model=""):
    raise RuntimeError("stand-in consumer refuses " + rollout_id)
