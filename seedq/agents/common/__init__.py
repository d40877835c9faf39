"""The toolkit agents build on: torsos and the recurrent body, action distributions and policy
heads, normalisation, prioritised replay, the gradient step, reward targets, and the two agent
skeletons (on-policy and replay). Only agents (and tools that build an agent's model) import it.
"""
