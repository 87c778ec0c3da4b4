"""The case model: the RNN config, the case and its id, parameter layout, tensor names,
packed lengths, profiles and the draw, narrowing.
"""
