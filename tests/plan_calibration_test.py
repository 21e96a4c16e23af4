"""The memory model against the TPU compiler on one point of the calibration grid
(zoo/plan/calibration.py; the whole grid, mixtures of experts on expert axes among its 50
points: benchmarks/plan_calibration.py): a decoder with remat full on a tensor axis of 8,
AOT-compiled for its v5p slice at the compiler's default effort (tests/conftest.py)."""

import pytest

from zoo.plan import calibration


@pytest.mark.parametrize('name', ['llama-tensor8'])
def test_the_memory_model_is_within_15_percent_of_the_compiler(name):
  result = calibration.measure(calibration.BY_NAME[name])
  assert 'at_least' not in result['compiled'], f'{name} no longer fits its slice'
  ratio = result['estimate']['total'] / result['compiled']['total']
  assert 0.85 <= ratio <= 1.15, (name, ratio, result)


def test_every_grid_point_names_a_config_slice_and_mesh_that_resolve():
  assert len(calibration.POINTS) >= 40 and len(calibration.BY_NAME) == len(calibration.POINTS)
  for point in calibration.POINTS:
    config = point.load()
    assert {a: config.mesh[a] for a in point.mesh} == point.mesh, point.name
