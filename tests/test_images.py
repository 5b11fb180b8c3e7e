import numpy as np
import pytest

from runner.model.images import decode_png, encode_png, png_text, to_uint8_hwc


def test_mlperf_conversion_scales_clips_and_rounds_half_to_even():
    chw = np.array([0.0, 1.0, 2.0, -1.0, 0.5 / 255, 1.5 / 255, 127.5 / 255], np.float32)
    images = np.broadcast_to(chw, (1, 3, 1, 7))
    out = to_uint8_hwc(images)
    assert out.shape == (1, 1, 7, 3) and out.dtype == np.uint8
    assert out[0, 0, :, 0].tolist() == [0, 255, 255, 0, 0, 2, 128]


def test_png_round_trips_pixels_and_text():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (17, 9, 3), dtype=np.uint8)
    data = encode_png(image, {"qsl_idx": "42", "worker": "w001"})
    assert np.array_equal(decode_png(data), image)
    assert png_text(data) == {"qsl_idx": "42", "worker": "w001"}


def test_rejects_non_rgb_uint8():
    with pytest.raises(ValueError):
        encode_png(np.zeros((4, 4, 3), np.float32))
    with pytest.raises(ValueError):
        to_uint8_hwc(np.zeros((1, 4, 8, 8), np.float32))
