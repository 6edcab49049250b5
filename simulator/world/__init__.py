"""The world the rays meet: scenes loaded with trimesh (:mod:`.scene`), their persistent
parts cache (:mod:`.meshcache`), Open3D's ray casting (:mod:`.raycast`) and the boxes of
the countable objects (:mod:`.boxes`)."""
