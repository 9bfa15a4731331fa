"""configs/ijepa.py's ":cpu" variant validates and its masks are drawable."""

from configs import ijepa
from ssljax import config_validation


def test_cpu_variant_validates():
  c = ijepa.get_config("cpu")
  config_validation.validate(c)
  assert c.model.encoder_kwargs.hidden_dim == 96
  assert c.num_steps == 300 and c.batch_size == 128
  assert (c.teacher.momentum, c.teacher.final_momentum) == (0.97, 0.999)


def test_cpu_smoke_variant_validates_and_is_small():
  c = ijepa.get_config("cpu,smoke")
  config_validation.validate(c)
  assert c.model.encoder_kwargs.hidden_dim == 8
  assert c.num_steps == 6
