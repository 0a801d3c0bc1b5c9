"""Everything that touches the world: model calls and tools, as Temporal activities.

Import the module you need (`activities.tools`, `longrun.artifacts`, ...): this package
imports nothing, so a process that needs the tool catalogue does not load the model client.
`activities.bound` gathers what a worker hosts."""
