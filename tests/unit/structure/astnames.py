"""What the structure tests share to read a module with ``ast``."""
import ast


def import_aliases(tree):
    """{local name: the dotted name it stands for} from every absolute import of a
    parsed module: ``import a.b`` binds ``a``, ``import a.b as x`` binds ``x`` to
    ``a.b``, ``from a import b as y`` binds ``y`` to ``a.b``."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    top = a.name.split('.')[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f'{node.module}.{a.name}'
    return names
