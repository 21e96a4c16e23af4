"""The Linen modules of the three families and the layers they share.

zoo/families builds them from the config (`zoo.families.build(config.model)`).
"""

# Model collections that live in the train state beside the params: kept across steps,
# checkpointed, moved by the loss (not by the optimizer), read by eval and generation.
# moe_bias: the experts' selection biases (model.moe.bias_update_rate).
STATE_COLLECTIONS = ('moe_bias',)
