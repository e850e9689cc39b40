"""Robustness to band-limited noise (Paper A, Fig 2b): accuracy drop per frequency band of additive noise.

Two constructions of the noise, chosen by name (:data:`BAND_NOISE`): ``annulus`` (the default, below) and
``official`` (Paper A's released ``FreqAttack`` over ``Random``, :func:`official_band_noise`).

Band (``annulus``). Frequencies are in units of pi: along an axis of length ``n`` the DFT index ``k`` has frequency
``2 * fftfreq(n)[k]`` in [-1, 1). The band of centre ``f`` and width ``b`` is the *square annulus*
``f - b/2 <= max(|fy|, |fx|) < f + b/2`` (half-open; a 1e-9 tolerance makes grid points that sit exactly on a
bound fall as exact arithmetic says). The default bands are centres 0.1, 0.2, ..., 0.9 with width 0.1.

Noise (``annulus``). For every image and channel independently, random signs ``s`` in {-1, +1}^(h x w) are band-passed:
``n = Re(ifft2(fft2(s) * mask))`` (the mask is symmetric under ``f -> -f``, so the imaginary part is rounding
only), then each image's noise (all channels) is scaled to root-mean-square ``strength``, in the units of the
model's (normalised) input. The accuracy drop of a band is ``accuracy(clean) - accuracy(x + n)``.

Official. A band of centre ``c`` and width ``b`` (units of pi) is the released code's ``f = c * pi`` and
``s = b/2 * pi`` (radians, ``s`` the half-width). Signs ``eps * sign(N(0, 1))`` per image and channel are
transformed, centred (``fftshift``), multiplied by the difference of two centred squares (:func:`official_mask`),
shifted back (``ifftshift``) and transformed back; the real part is the noise, not renormalised.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from landscape.core.criteria import select_logits
from landscape.core.front import eval_model
from landscape.errors import LandscapeError
from landscape.options.fourier import BANDS, EPS, STRENGTH, WIDTH  # the defaults, defined once with the options

_TOL = 1e-9


def band_mask(h: int, w: int, centre: float, width: float = WIDTH) -> np.ndarray:
    """Boolean (h, w) mask in FFT order of the square annulus ``centre -+ width/2`` (see the module doc).

    The mask is ``centre - width/2 <= max(|fy|, |fx|) < centre + width/2`` with ``fy, fx = 2 * fftfreq``.

    Args:
        h: image height (pixels).
        w: image width (pixels).
        centre: band centre, in units of pi (0 to 1).
        width: band width, in units of pi.

    Returns:
        A boolean ``(h, w)`` array in FFT (unshifted) order; True inside the band.
    """
    fy = np.abs(2.0 * np.fft.fftfreq(h))[:, None]
    fx = np.abs(2.0 * np.fft.fftfreq(w))[None, :]
    rho = np.maximum(fy, fx)
    return (rho >= centre - width / 2 - _TOL) & (rho < centre + width / 2 - _TOL)


def band_noise(
    shape: Sequence[int],
    centre: float,
    width: float = WIDTH,
    strength: float = STRENGTH,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Random sign noise of ``shape`` (B, C, H, W) band-passed to the square annulus, RMS ``strength`` per image.

    ``n = Re(ifft2(fft2(s) * mask))`` for random signs ``s``, scaled by ``strength / rms(n)`` per image.

    Args:
        shape: ``(B, C, H, W)`` of the noise (the images it is added to).
        centre: band centre, in units of pi.
        width: band width, in units of pi.
        strength: root-mean-square of each image's noise (over its channels and pixels), in input units.
        generator: the random generator of the signs; None uses torch's global one.
        dtype: dtype of the returned noise (computed in float64).

    Returns:
        The noise, a ``(B, C, H, W)`` tensor of ``dtype`` on CPU.

    Raises:
        LandscapeError: no frequency of an ``H x W`` image lies in the band.
    """
    b, c, h, w = shape
    mask = band_mask(h, w, centre, width)
    if not mask.any():
        raise LandscapeError(
            f"no frequency of a {h}x{w} image lies in the band {centre}pi +- {width / 2}pi; choose wider or other bands"
        )
    signs = torch.randint(0, 2, (b, c, h, w), generator=generator).to(torch.float64) * 2 - 1
    spec = torch.fft.fft2(signs) * torch.from_numpy(mask)
    noise = torch.fft.ifft2(spec).real
    rms = noise.pow(2).mean(dim=(1, 2, 3), keepdim=True).sqrt()
    return (noise * (strength / rms)).to(dtype)


def _centred_side(n: int, half: int) -> np.ndarray:
    """Boolean ``(n,)`` indicator, in centred (fftshift) order, of a centred segment of ``2 * half`` indices.

    The segment is the frequency indices ``-half .. half-1`` around the zero frequency (index ``n // 2`` after
    ``fftshift``): for even ``n`` this is the released code's ``ones(2 half)`` padded by ``(n - 2 half) / 2`` on
    each side. ``2 * half >= n`` keeps the whole axis and ``half <= 0`` none (the released clipping).

    Args:
        n: length of the axis.
        half: half the side of the square (``int((f +- s) n / (2 pi))``).

    Returns:
        The indicator of the kept indices, centred order.
    """
    keep = np.zeros(n, bool)
    if 2 * half >= n:
        keep[:] = True
    elif half > 0:
        keep[n // 2 - half : n // 2 + half] = True
    return keep


def official_mask(h: int, w: int, centre: float, width: float = WIDTH) -> np.ndarray:
    """Boolean (h, w) mask, in centred (fftshift) order, of the released ``FreqAttack`` band.

    With ``f = centre * pi`` and ``s = width/2 * pi`` (radians), the mask keeps the centred square of half-side
    ``int((f + s) n / (2 pi))`` minus the centred square of half-side ``int((f - s) n / (2 pi))`` (see
    :func:`_centred_side`), with ``n = h`` along the rows and ``n = w`` along the columns (the released code,
    square images only, uses ``h`` for both).

    Args:
        h: image height (pixels).
        w: image width (pixels).
        centre: band centre, in units of pi.
        width: band width, in units of pi (the released ``s`` is half of it, times pi).

    Returns:
        A boolean ``(h, w)`` array in centred order (zero frequency at ``(h // 2, w // 2)``); True inside.
    """
    f, s = centre * math.pi, width / 2 * math.pi

    def square(r: float) -> np.ndarray:
        rows = _centred_side(h, int((r * h) / (2 * math.pi)))
        cols = _centred_side(w, int((r * w) / (2 * math.pi)))
        return rows[:, None] & cols[None, :]

    return square(f + s) & ~square(f - s)


def official_band_noise(
    shape: Sequence[int],
    centre: float,
    width: float = WIDTH,
    eps: float = EPS,
    generator: torch.Generator | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Paper A's released band noise: ``eps * sign(N(0, 1))`` band-passed by :func:`official_mask`, per channel.

    ``n = Re(ifft2(ifftshift(fftshift(fft2(eps * sign(g))) * mask)))`` for standard normal ``g`` of ``shape``
    (drawn in float64); the noise is not renormalised, so its energy depends on the band.

    Args:
        shape: ``(B, C, H, W)`` of the noise (the images it is added to).
        centre: band centre, in units of pi (``f = centre * pi``).
        width: band width, in units of pi (``s = width/2 * pi``).
        eps: amplitude of the signs, in input units.
        generator: the random generator of ``g``; None uses torch's global one.
        dtype: dtype of the returned noise (computed in float64).

    Returns:
        The noise, a ``(B, C, H, W)`` tensor of ``dtype`` on CPU.

    Raises:
        LandscapeError: the mask keeps no frequency of an ``H x W`` image.
    """
    b, c, h, w = shape
    mask = official_mask(h, w, centre, width)
    if not mask.any():
        raise LandscapeError(
            f"the official mask of the band {centre}pi +- {width / 2}pi keeps no frequency of a {h}x{w} image; "
            "choose wider or other bands"
        )
    signs = eps * torch.randn((b, c, h, w), generator=generator, dtype=torch.float64).sign()
    spec = torch.fft.fftshift(torch.fft.fft2(signs), dim=(-2, -1)) * torch.from_numpy(mask)
    noise = torch.fft.ifft2(torch.fft.ifftshift(spec, dim=(-2, -1))).real
    return noise.to(dtype)


#: construction name -> (its band-noise function, the key of its amplitude in a ``noise`` dict of :func:`hits`);
#: every function is called as ``fn(shape, centre, width, amplitude, generator, dtype)``
BAND_NOISE: dict[str, tuple[Callable[..., Tensor], str]] = {
    "annulus": (band_noise, "strength"),
    "official": (official_band_noise, "eps"),
}


def make_noise(
    shape: Sequence[int], noise: dict, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The band noise that a ``noise`` dict of :func:`hits` describes, from its construction's function.

    Args:
        shape: ``(B, C, H, W)`` of the noise.
        noise: ``centre``, ``width``, ``construction`` (default ``annulus``) and that construction's amplitude:
            ``strength`` (``annulus``) or ``eps`` (``official``).
        generator: the random generator; None uses torch's global one.
        dtype: dtype of the returned noise.

    Returns:
        The noise, a ``(B, C, H, W)`` tensor of ``dtype`` on CPU.

    Raises:
        LandscapeError: an unknown construction or an empty band.
    """
    construction = noise.get("construction", "annulus")
    if construction not in BAND_NOISE:
        raise LandscapeError(f"unknown noise construction {construction!r}; choose one of {', '.join(BAND_NOISE)}")
    fn, amplitude = BAND_NOISE[construction]
    return fn(shape, noise["centre"], noise["width"], noise[amplitude], generator, dtype)


def hits(
    model: nn.Module,
    batches: Iterable[tuple[int, Sequence[Tensor]]],
    noise: dict | None = None,
    output: str | int | None = None,
) -> tuple[int, int]:
    """``(correct, total)`` top-1 predictions of ``model`` over indexed ``(j, (x, y))`` batches.

    With ``noise`` (``centre``, ``width``, ``seed``, ``construction`` and its amplitude, see :func:`make_noise`)
    batch ``j`` gets band noise from a generator seeded with ``seed + j``: the counts depend on nothing but
    these options and the batch index, so batches may be split among processes and the counts summed.
    ``output`` selects the logits of a model returning a tuple or dict
    (:func:`~landscape.core.criteria.select_logits`).

    Args:
        model: the classifier (called under ``torch.no_grad``, not put in eval mode here).
        batches: ``(j, (x, y))`` pairs: global batch index, images ``(b, C, H, W)`` and labels ``(b,)``.
        noise: band noise options (``centre``, ``width``, ``seed``, optional ``construction`` (default
            ``annulus``) and ``strength`` or ``eps``); None for clean images.
        output: where the logits are in the model's output.

    Returns:
        ``(correct, total)``: the number of correct top-1 predictions and of samples.

    Raises:
        LandscapeError: an empty band or unknown construction (:func:`make_noise`), no logits in the model's
            output, or noisy images or their logits that are not finite (noise too strong for the dtype).
    """
    correct, total = 0, 0
    with torch.no_grad():
        for j, (x, y) in batches:
            if noise is not None:
                gen = torch.Generator().manual_seed(int(noise["seed"]) + j)
                n = make_noise(x.shape, noise, gen, x.dtype)
                x = x + n.to(x.device)
                if not bool(torch.isfinite(x).all()):
                    amplitude = {k: noise[k] for k in ("strength", "eps") if k in noise}
                    raise LandscapeError(
                        f"band noise of {amplitude} makes the noisy images non-finite (the sums overflow "
                        f"{x.dtype}), so no accuracy can be measured; give a smaller --noise-strength (or --noise-eps)"
                    )
            logits = select_logits(model(x), output)
            if noise is not None and not bool(torch.isfinite(logits).all()):
                raise LandscapeError(
                    "the model's logits on the noisy images are not finite (NaN or inf), so the accuracy drop would "
                    "be meaningless; give a smaller --noise-strength (or --noise-eps)"
                )
            pred = logits.argmax(dim=-1)
            correct += int((pred == y).sum())
            total += int(y.numel())
    return correct, total


def _fraction(correct: int, total: int) -> float:
    if total == 0:
        raise LandscapeError("no labelled samples to measure accuracy on")
    return correct / total


def accuracy(
    model: nn.Module, batches: Iterable[Sequence[Tensor]], noise: dict | None = None, output: str | int | None = None
) -> float:
    """Top-1 accuracy ``correct / total`` of ``model`` over ``(x, y)`` batches, noisy as in :func:`hits`.

    Args:
        model: the classifier.
        batches: ``(x, y)`` batches (indexed by their position for the noise seeds).
        noise: band noise options (see :func:`hits`); None for clean images.
        output: where the logits are in the model's output.

    Returns:
        The accuracy in [0, 1].

    Raises:
        LandscapeError: no samples, an empty band, or no logits in the model's output.
    """
    return _fraction(*hits(model, enumerate(batches), noise, output))


def band_accuracies(
    model: nn.Module,
    batches: Sequence[Sequence[Tensor]],
    bands: Sequence[float],
    *,
    width: float = WIDTH,
    strength: float = STRENGTH,
    seed: int = 0,
    output: str | int | None = None,
    construction: str = "annulus",
    eps: float = EPS,
    skip: Iterable[int] = (),
    combine: Callable[[tuple[int, int]], tuple[int, int]] | None = None,
) -> Iterator[tuple[int | None, float]]:
    """The clean accuracy, then the accuracy under the noise of each band not in ``skip``, as they finish.

    Yields ``(None, clean)`` first and then ``(i, accuracy of band i)``. ``batches`` are this process's share
    as ``(j, (x, y))`` pairs with their global index ``j``; ``combine`` sums the ``(correct, total)`` counts
    of all processes (identity by default).

    Args:
        model: the classifier (used as given; put it in eval mode first).
        batches: this process's ``(j, (x, y))`` batches.
        bands: band centres, in units of pi.
        width: band width, in units of pi.
        strength: RMS of each image's noise, in input units (``annulus``).
        seed: noise seed; batch ``j`` uses ``seed + j``.
        output: where the logits are in the model's output.
        construction: the noise construction, a key of :data:`BAND_NOISE`.
        eps: amplitude of the signs, in input units (``official``).
        skip: indices of bands not to evaluate (e.g. already stored).
        combine: maps this process's ``(correct, total)`` to the counts of all processes; None: identity.

    Yields:
        ``(None, clean accuracy)``, then ``(i, accuracy under the noise of band i)`` for each band not skipped.

    Raises:
        LandscapeError: no samples, an empty band, an unknown construction, or no logits in the model's output.
    """
    combine = combine or (lambda counts: counts)
    yield None, _fraction(*combine(hits(model, batches, None, output)))
    skipped = set(skip)
    for i, centre in enumerate(bands):
        if i in skipped:
            continue
        noise = {
            "centre": float(centre),
            "width": width,
            "strength": strength,
            "eps": eps,
            "seed": seed,
            "construction": construction,
        }
        yield i, _fraction(*combine(hits(model, batches, noise, output)))


@dataclass
class NoiseRobustness:
    """Accuracy under band noise: band centres (units of pi), accuracies, the clean accuracy and drops.

    Attributes:
        frequencies: band centres, in units of pi, shape ``(n_bands,)``.
        accuracy: accuracy under each band's noise, shape ``(n_bands,)``.
        clean_accuracy: accuracy without noise.
        width: band width, in units of pi.
        strength: RMS of each image's noise, in input units (``annulus``).
        construction: the noise construction (:data:`BAND_NOISE`).
        eps: amplitude of the signs, in input units (``official``).
    """

    frequencies: np.ndarray
    accuracy: np.ndarray
    clean_accuracy: float
    width: float
    strength: float
    construction: str = "annulus"
    eps: float = EPS

    @property
    def drop(self) -> np.ndarray:
        """``clean_accuracy - accuracy`` per band."""
        return self.clean_accuracy - self.accuracy


def noise_robustness(
    model: nn.Module,
    batches: Sequence[Sequence[Tensor]],
    *,
    bands: Sequence[float] = BANDS,
    width: float = WIDTH,
    strength: float = STRENGTH,
    seed: int = 0,
    construction: str = "annulus",
    eps: float = EPS,
) -> NoiseRobustness:
    """Accuracy of ``model`` on ``batches`` clean and with noise of every band (see the module doc).

    The model is used in eval mode (an eval deep copy if any module is training; never changed).

    Args:
        model: the classifier.
        batches: ``(x, y)`` batches of images ``(b, C, H, W)`` and labels ``(b,)``.
        bands: band centres, in units of pi.
        width: band width, in units of pi.
        strength: RMS of each image's noise, in input units (``annulus``).
        seed: noise seed; batch ``j`` uses ``seed + j``.
        construction: the noise construction, a key of :data:`BAND_NOISE`.
        eps: amplitude of the signs, in input units (``official``).

    Returns:
        The band centres, accuracies (``(n_bands,)``), clean accuracy and the noise options.

    Raises:
        LandscapeError: no samples, an empty band, or no logits in the model's output.
    """
    net = eval_model(model)
    indexed = list(enumerate(batches))
    results = dict(
        band_accuracies(
            net, indexed, bands, width=width, strength=strength, seed=seed, construction=construction, eps=eps
        )
    )
    accs = [results[i] for i in range(len(bands))]
    return NoiseRobustness(
        np.asarray(bands, dtype=float), np.asarray(accs), results[None], width, strength, construction, eps
    )
