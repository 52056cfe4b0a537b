"""Path 3: let combolayer find the invariances of a problem and project onto them."""

import combolayer as cl


def main() -> None:
    for spec in (
        cl.problems.TopK(n=6, k=2),
        cl.problems.Matching(rows=4, cols=4),
        cl.data.shortest_path_spec((3, 3)),
    ):
        hull = cl.analyze(spec)
        print(f"{spec.label}: {hull.normals.shape[0]} invariant directions, "
              f"solutions span an affine space of dimension {hull.dim}")


if __name__ == "__main__":
    main()
