"""The composition root: a composed config turned into components and wired (:mod:`gdro.compose.build`)."""
