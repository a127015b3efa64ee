"""Which runtime image a ModelServing runs, and whether the operator may run it. Pure.

A ModelServing's author chooses the images its pods run (spec.spark.image, and the containers of
its pod templates); the cluster admin narrows that with the chart's allowedImages, and gives a
default with runtimeImage (SECURITY.md, docs/pod-templates.md).
"""

from __future__ import annotations

import copy
import fnmatch
from dataclasses import dataclass
from typing import Any

from scorestream.api.v1alpha1 import modelserving as s
from scorestream.operator import podtemplate
from scorestream.operator.conditions import Reason


@dataclass(frozen=True)
class Verdict:
    image: str | None  # the runtime image to run; None: refused
    reason: Reason | None = None  # when refused: NoRuntimeImage or ImageNotAllowed
    message: str = ""


def allowed(image: str, patterns: list[str], runtime_image: str | None) -> bool:
    """An image the allow-list admits: any with no list; the admin's own default always.
    Patterns match the whole reference as written (case-sensitive: registries are)."""
    return not patterns or image == runtime_image or any(fnmatch.fnmatchcase(image, p) for p in patterns)


def decide(spec: s.ModelServingSpec, runtime_image: str | None, patterns: list[str]) -> Verdict:
    image = spec.spark.image or runtime_image
    if image is None:
        return Verdict(None, Reason.NO_RUNTIME_IMAGE,
                       "spec.spark.image is not set and the operator has no default runtime image"
                       " (the chart's runtimeImage): set one of them")
    refused = [i for i in [image, *podtemplate.template_images(spec)] if not allowed(i, patterns, runtime_image)]
    if refused:
        return Verdict(None, Reason.IMAGE_NOT_ALLOWED,
                       f"image(s) {', '.join(repr(i) for i in dict.fromkeys(refused))} not allowed by the operator's"
                       f" allowedImages ({', '.join(patterns)}): nothing is created or updated until the spec"
                       " names allowed images (the cluster admin allows more with the chart's allowedImages)")
    return Verdict(image)


def with_image(body: dict[str, Any], image: str) -> dict[str, Any]:
    """The resource with its runtime image filled in: what the operator renders, records as the
    last stable spec, and compares children with."""
    spec = body.get("spec") or {}
    if (spec.get("spark") or {}).get("image") == image:
        return body
    out = copy.copy(body)
    out["spec"] = {**spec, "spark": {**(spec.get("spark") or {}), "image": image}}
    return out
