"""The Pulumi program (``Pulumi.yaml`` points ``main`` here) and its
ComponentResources, one module per concern. The program itself lands with
issue #5; until then this package holds no resources."""
