# Run by CTest: every function and constant of kopt.h (HEADER) is bound in the Fortran module
# (MODULE), with the same values, and every function is called by the Fortran test (CALLER),
# so a C function added without its Fortran binding fails here.
file(READ ${HEADER} header)
file(READ ${MODULE} module)
file(READ ${CALLER} caller)
string(TOLOWER "${module}" module_lower)
string(TOLOWER "${caller}" caller_lower)

# Functions: a declaration starts a line with its return type.
string(REGEX MATCHALL "\n(kopt_status|void|const char\\*) kopt_[a-z0-9_]+\\(" declared "${header}")
set(problems "")
set(functions 0)
foreach(d ${declared})
  string(REGEX REPLACE ".* (kopt_[a-z0-9_]+)\\($" "\\1" name "${d}")
  math(EXPR functions "${functions} + 1")
  if(NOT module_lower MATCHES "(function|subroutine) ${name}\\(")
    string(APPEND problems "  ${name}: no binding in ${MODULE}\n")
  endif()
  if(NOT caller_lower MATCHES "${name}\\(")
    string(APPEND problems "  ${name}: not called by ${CALLER}\n")
  endif()
endforeach()

# Constants: every KOPT_ value but the enums' int32 sizers, with its value.
string(REGEX MATCHALL "KOPT_[A-Z0-9_]+ = [0-9]+" constants "${header}")
set(values 0)
foreach(c ${constants})
  if(c MATCHES "FORCE_INT32")
    continue()
  endif()
  math(EXPR values "${values} + 1")
  if(NOT module MATCHES "${c}[^0-9]")
    string(APPEND problems "  ${c}: not in ${MODULE} with that value\n")
  endif()
endforeach()

if(functions LESS 30 OR values LESS 15)
  message(FATAL_ERROR "parsed ${functions} functions and ${values} constants of ${HEADER}: "
                      "too few, the parse is broken")
endif()
if(problems)
  message(FATAL_ERROR "the Fortran module does not follow kopt.h:\n${problems}")
endif()
message(STATUS "${functions} functions and ${values} constants of kopt.h: all bound and called")
