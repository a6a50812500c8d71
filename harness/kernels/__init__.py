"""The compute engine, below the harness and the attentions alike: the one linear-attention kernel and the
feature-map contract (`linear`), the fused CPU library (`native`), CPU threading (`cpu_threads`), key padding masks
(`masks`), route counting (`routes`), the optional flash-linear-attention route (`fla_route`), the short
convolution (`short_conv`), the base of the recurrent attentions (`recurrent_attention`) and of the gated ones
(`gated_recurrence`).

It imports only the foundation (`attnbench.errors`, `attnbench.options`, `attnbench.registry`), never the harness's
model, training or measurements, nor any attention in `attnbench.baselines`."""
